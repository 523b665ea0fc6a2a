//go:build tools

// Package tools pins KubeRay's operator (built from this wrapper module, like JobSet's: `go
// install MODULE@VERSION` asks the proxy for the module's version list).
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
