// Minimal quic-go HTTP/3 file server (UDP) plus Go net/http HTTP/2 (TCP) on the same port,
// for scripts/peers/run.sh. Usage: quicgo-server ADDR ROOT CERT KEY
package main

import (
	"log"
	"net/http"
	"os"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	if len(os.Args) != 5 {
		log.Fatal("usage: quicgo-server ADDR ROOT CERT KEY")
	}
	addr, root, cert, key := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	h := http.FileServer(http.Dir(root))
	go func() {
		log.Fatal(http.ListenAndServeTLS(addr, cert, key, h))
	}()
	log.Printf("quic-go h3 (UDP) + net/http h2 (TCP) on %s, root %s", addr, root)
	log.Fatal(http3.ListenAndServeQUIC(addr, cert, key, h))
}
