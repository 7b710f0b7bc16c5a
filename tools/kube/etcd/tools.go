//go:build tools

// Package etcd pins the etcd server (its module's own main package) for Plinth's real-cluster tests.
package etcd

import _ "go.etcd.io/etcd/server/v3"
