// Minimal quic-go HTTP/3 file server (UDP) plus Go net/http HTTP/2 (TCP) on the same port,
// for scripts/peers/run.sh; and an HTTP/3 client mode for checking that agentwire serve
// works with quic-go's client.
// Usage: quicgo-server ADDR ROOT CERT KEY
//        quicgo-server client URL CA_PEM COUNT   (COUNT sequential GETs on one connection)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	if len(os.Args) == 5 && os.Args[1] == "client" {
		client(os.Args[2], os.Args[3], os.Args[4])
		return
	}
	if len(os.Args) != 5 {
		log.Fatal("usage: quicgo-server ADDR ROOT CERT KEY | quicgo-server client URL CA_PEM COUNT")
	}
	addr, root, cert, key := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	h := http.FileServer(http.Dir(root))
	go func() {
		log.Fatal(http.ListenAndServeTLS(addr, cert, key, h))
	}()
	log.Printf("quic-go h3 (UDP) + net/http h2 (TCP) on %s, root %s", addr, root)
	log.Fatal(http3.ListenAndServeQUIC(addr, cert, key, h))
}

func client(url, caFile, countText string) {
	count, err := strconv.Atoi(countText)
	if err != nil || count < 1 || count > 100000 {
		log.Fatalf("COUNT must be 1..100000, got %q", countText)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("no certificate in %s", caFile)
	}
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	total := 0
	for i := 0; i < count; i++ {
		resp, err := c.Get(url)
		if err != nil {
			log.Fatalf("request %d: %v", i, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			log.Fatalf("request %d body: %v", i, err)
		}
		if resp.StatusCode != 200 || (resp.ContentLength >= 0 && n != resp.ContentLength) {
			log.Fatalf("request %d: status %d, %d bytes, content-length %d", i, resp.StatusCode, n, resp.ContentLength)
		}
		total += int(n)
	}
	fmt.Printf("quic-go client: %d responses, %d bytes, proto %s\n", count, total, "HTTP/3")
}
