//go:build tools

// Package tools pins JobSet's controller (built from this wrapper module: `go install
// sigs.k8s.io/jobset@VERSION` asks the proxy for the module's version list, which it refuses).
package tools

import _ "sigs.k8s.io/jobset"
