//go:build tools

// Package tools pins Kueue's controller manager, built from this wrapper module of its own:
// Kueue pins JobSet v0.11.1, which the JobSet wrapper (v0.12.0) cannot share.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
