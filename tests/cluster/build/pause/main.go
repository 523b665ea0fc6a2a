// Command pause holds a real node's pod sandbox (its namespaces), as the kubelet's usual
// pause image does: it sleeps until SIGINT or SIGTERM and reaps any child handed to it.
// Built into the node's own sandbox image (images.sh): this machine cannot fetch public ones.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
