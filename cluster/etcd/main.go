// etcd for kfchaos's local control plane (see docs/cluster.md).
//
// go.etcd.io/etcd/server/v3 has no importable main package; upstream's own binary is this same call
// (etcd-io/etcd, server/main.go: `etcdmain.Main(os.Args)`).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
