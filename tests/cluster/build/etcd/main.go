// Command etcd is etcd's own server entry point (what go.etcd.io/etcd/v3's main.go calls),
// built from the published server module: the root module cannot be installed (replace lines).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
