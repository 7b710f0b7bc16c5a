//go:build tools

// Package kwok pins kwok, which runs fake (GPU) nodes and drives pods on them, for Plinth's tests.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
