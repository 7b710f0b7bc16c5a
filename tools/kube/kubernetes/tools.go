//go:build tools

// Package kubernetes pins the Kubernetes control-plane commands Plinth's real-cluster tests run.
package kubernetes

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
