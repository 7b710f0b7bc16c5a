//go:build tools

// Package lws pins the LeaderWorkerSet controller (its manager and webhooks), which turns a
// LeaderWorkerSet (one multi-node replica per group) into StatefulSets and pods, for Plinth's tests.
package lws

import _ "sigs.k8s.io/lws/cmd"
