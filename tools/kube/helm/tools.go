//go:build tools

// Package helm pins helm, which installs Plinth's own chart (charts/plinth) in Plinth's tests.
package helm

import _ "helm.sh/helm/v4/cmd/helm"
