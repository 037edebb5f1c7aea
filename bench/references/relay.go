// Reference relays for the benchmark: what a compiled relay costs on the
// same machine, so the gateway's figures can be read against more than the
// direct connection. Never shipped; standard library only.
//
//	relay http  Go's httputil.ReverseProxy, TLS on both legs, one fixed
//	            bearer token attached: the usual "write the data plane in Go".
//	relay tcp   a byte-for-byte TCP relay (TLS passes through end to end):
//	            the price of one more process hop, with no HTTP or TLS work.
//
// Configuration (environment): RELAY_PORT, RELAY_UPSTREAM (https URL),
// and for http also RELAY_UPSTREAM_CA, RELAY_TOKEN, RELAY_TLS_CERT, RELAY_TLS_KEY.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: relay http|tcp")
	}
	listen := "127.0.0.1:" + os.Getenv("RELAY_PORT")
	upstream, err := url.Parse(os.Getenv("RELAY_UPSTREAM"))
	if err != nil {
		log.Fatal(err)
	}
	switch os.Args[1] {
	case "http":
		log.Fatal(serveHTTP(listen, upstream))
	case "tcp":
		log.Fatal(serveTCP(listen, upstream.Host))
	default:
		log.Fatalf("unknown mode %q", os.Args[1])
	}
}

func serveHTTP(listen string, upstream *url.URL) error {
	ca, err := os.ReadFile(os.Getenv("RELAY_UPSTREAM_CA"))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	bearer := "Bearer " + os.Getenv("RELAY_TOKEN")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Header.Set("Authorization", bearer)
		},
		// The same choices as the gateway's upstream: HTTP/1.1, a large idle
		// pool, bodies never decompressed, answers flushed as they arrive.
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots},
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
		FlushInterval: -1,
	}
	server := &http.Server{Addr: listen, Handler: proxy,
		// HTTP/1.1 only, as the load generator and the gateway speak it.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	return server.ListenAndServeTLS(os.Getenv("RELAY_TLS_CERT"), os.Getenv("RELAY_TLS_KEY"))
}

func serveTCP(listen, upstream string) error {
	listener, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		client, err := listener.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer client.Close()
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer server.Close()
			go func() { io.Copy(server, client); server.(*net.TCPConn).CloseWrite() }()
			io.Copy(client, server)
		}()
	}
}
