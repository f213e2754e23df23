// Package webhooktest runs webhook endpoints for tests: a real net/http
// server on a local port, over plain HTTP/1.1, h2c, or TLS with HTTP/2
// negotiated (certificates from a CA made for the test), that records every
// request, answers as the test says, and can be cut off and brought back on
// the same address. Everything it starts stops when the test ends.
package webhooktest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
)

// Secret is a Standard Webhooks signing secret for tests; Key is its key.
const Secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// Key is the HMAC key Secret stands for.
func Key() []byte {
	k, err := base64.StdEncoding.DecodeString(Secret[len("whsec_"):])
	if err != nil {
		panic(err)
	}
	return k
}

// SecretFile writes secret to a file only the test can read and returns
// its path, for the secret_file option.
func SecretFile(t testing.TB, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatalf("webhooktest: write secret file: %v", err)
	}
	return path
}

// Request is one request the receiver got, and what it answered.
type Request struct {
	Method string
	// Path is the path as sent, percent-encoded.
	Path     string
	RawQuery string
	// Proto is "HTTP/1.1" or "HTTP/2.0".
	Proto  string
	Header http.Header
	Body   []byte
	// Status is what the receiver answered; 0 while it has not, or when
	// the responder took the connection over.
	Status int
}

// Responder answers a request whose body has been read (r.Body reads it
// again). It runs on the server's goroutine: it may block, until
// r.Context() ends at the latest.
type Responder func(w http.ResponseWriter, r *http.Request)

// Accept answers 204 No Content.
func Accept(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

// Option configures a Receiver.
type Option func(*Receiver)

// TLS serves HTTPS with a certificate for 127.0.0.1 from the receiver's own
// CA (Certs().CA), offering HTTP/2 and HTTP/1.1.
func TLS() Option { return func(r *Receiver) { r.useTLS = true } }

// MutualTLS is TLS that also requires a client certificate from the
// receiver's CA (Certs().ClientCert and ClientKey).
func MutualTLS() Option { return func(r *Receiver) { r.useTLS, r.mutual = true, true } }

// H2C serves HTTP/2 without TLS as well as HTTP/1.1.
func H2C() Option { return func(r *Receiver) { r.h2c = true } }

// Respond sets how the receiver answers; the default is Accept.
func Respond(fn Responder) Option { return func(r *Receiver) { r.respond.Store(&fn) } }

// CountOnly keeps no requests, only counts the answered ones (Count): for
// benchmarks that send hundreds of thousands.
func CountOnly() Option { return func(r *Receiver) { r.countOnly = true } }

// Certs are PEM files the receiver's TLS uses.
type Certs struct {
	// CA signed the server's and the client's certificate.
	CA string
	// ClientCert and ClientKey are a client certificate for mutual TLS.
	ClientCert, ClientKey string
	server                tls.Certificate
	pool                  *x509.CertPool
}

// Receiver is a webhook endpoint run by the test.
type Receiver struct {
	useTLS, mutual, h2c, countOnly bool
	respond                        atomic.Pointer[Responder]
	certs                          *Certs
	addr                           string

	mu       sync.Mutex
	srv      *http.Server // nil while stopped
	open     map[net.Conn]struct{}
	requests []*Request
	answered atomic.Int64 // 2xx answers
	conns    atomic.Int64 // connections accepted
	inFlight atomic.Int64
	// maxInFlight is the most requests handled at once.
	maxInFlight atomic.Int64
}

// Start runs a receiver until the test ends.
func Start(t testing.TB, opts ...Option) *Receiver {
	t.Helper()
	r := &Receiver{open: map[net.Conn]struct{}{}}
	accept := Responder(Accept)
	r.respond.Store(&accept)
	for _, o := range opts {
		o(r)
	}
	if r.useTLS {
		r.certs = makeCerts(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("webhooktest: listen: %v", err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	// Stop cuts the connections, which ends the handlers still running.
	t.Cleanup(r.Stop)
	return r
}

// Addr is the receiver's host:port.
func (r *Receiver) Addr() string { return r.addr }

// URL is the receiver's base URL (scheme://host:port) followed by rest,
// a path and query such as "/hooks/{event_type}?secret_file=…".
func (r *Receiver) URL(rest string) string {
	scheme := "http"
	if r.useTLS {
		scheme = "https"
	}
	return scheme + "://" + r.addr + rest
}

// Certs returns the TLS files, or nil without TLS.
func (r *Receiver) Certs() *Certs { return r.certs }

// SetResponder changes how the receiver answers from now on.
func (r *Receiver) SetResponder(fn Responder) { r.respond.Store(&fn) }

// Stop closes the listener and cuts every connection, in flight or idle,
// as a crashed endpoint would.
func (r *Receiver) Stop() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Drop closes every open connection while the receiver keeps listening, as
// an endpoint behind a restarting proxy does; new connections are accepted
// at once.
func (r *Receiver) Drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.open {
		_ = c.Close()
	}
}

// Restart listens again on the same address.
func (r *Receiver) Restart(t testing.TB) {
	t.Helper()
	var ln net.Listener
	eventually.True(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", r.addr)
		return err == nil
	}, func() string { return "listening again on " + r.addr })
	r.serve(ln)
}

func (r *Receiver) serve(ln net.Listener) {
	srv := &http.Server{
		Handler:           http.HandlerFunc(r.handle),
		ReadHeaderTimeout: 10 * time.Second,
		// Failed handshakes are what some tests are about.
		ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(c net.Conn, s http.ConnState) {
			r.mu.Lock()
			defer r.mu.Unlock()
			switch s {
			case http.StateNew:
				r.conns.Add(1)
				r.open[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(r.open, c)
			}
		},
		Protocols: new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	if r.h2c {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	if r.useTLS {
		srv.Protocols.SetHTTP2(true)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{r.certs.server}, MinVersion: tls.VersionTLS12}
		if r.mutual {
			srv.TLSConfig.ClientAuth = tls.RequireAndVerifyClientCert
			srv.TLSConfig.ClientCAs = r.certs.pool
		}
	}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() {
		var err error
		if r.useTLS {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		_ = err // ends with http.ErrServerClosed at Stop
	}()
}

func (r *Receiver) handle(w http.ResponseWriter, hr *http.Request) {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for m := r.maxInFlight.Load(); n > m && !r.maxInFlight.CompareAndSwap(m, n); m = r.maxInFlight.Load() {
	}
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		return // the client went away mid-body
	}
	hr.Body = io.NopCloser(bytes.NewReader(body))
	var req *Request
	if !r.countOnly {
		req = &Request{
			Method: hr.Method, Path: hr.URL.EscapedPath(), RawQuery: hr.URL.RawQuery, Proto: hr.Proto,
			Header: hr.Header.Clone(), Body: body,
		}
		r.mu.Lock()
		r.requests = append(r.requests, req)
		r.mu.Unlock()
	}
	sw := &statusWriter{ResponseWriter: w}
	(*r.respond.Load())(sw, hr)
	status := sw.status
	if status == 0 && !sw.hijacked {
		status = http.StatusOK
	}
	if status >= 200 && status < 300 {
		r.answered.Add(1)
	}
	if req != nil {
		r.mu.Lock()
		req.Status = status
		r.mu.Unlock()
	}
}

type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack takes the connection over; the request then has no answer.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Requests returns every request received so far, in arrival order.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Request, len(r.requests))
	for i, req := range r.requests {
		out[i] = *req
	}
	return out
}

// Count is how many requests were answered with a 2xx.
func (r *Receiver) Count() int { return int(r.answered.Load()) }

// Connections is how many connections the receiver accepted.
func (r *Receiver) Connections() int { return int(r.conns.Load()) }

// MaxInFlight is the most requests the receiver handled at once.
func (r *Receiver) MaxInFlight() int { return int(r.maxInFlight.Load()) }

// Delivered waits up to 30 seconds until want POST requests (events, not
// health checks) that match (nil: all) were answered with a 2xx, and
// returns those, in arrival order.
func (r *Receiver) Delivered(t testing.TB, want int, match func(*Request) bool) []Request {
	t.Helper()
	var got []Request
	eventually.True(t, 30*time.Second, func() bool {
		got = got[:0]
		for _, req := range r.Requests() {
			if req.Method == http.MethodPost && req.Status >= 200 && req.Status < 300 && (match == nil || match(&req)) {
				got = append(got, req)
			}
		}
		return len(got) >= want
	}, func() string { return fmt.Sprintf("%d delivered requests, have %d", want, len(got)) })
	return got
}

// makeCerts makes a CA, a server certificate for 127.0.0.1 and localhost,
// and a client certificate, and writes the CA and the client's files.
func makeCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := newCert(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "webhooktest CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	srvKey, srvCert := newCert(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	})
	cliKey, cliCert := newCert(t, caKey, caCert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "outbox-relay"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	})
	c := &Certs{
		CA:         writePEM(t, dir, "ca.pem", "CERTIFICATE", caCert.Raw),
		ClientCert: writePEM(t, dir, "client.pem", "CERTIFICATE", cliCert.Raw),
		ClientKey:  writePEM(t, dir, "client-key.pem", "PRIVATE KEY", marshalKey(t, cliKey)),
		server:     tls.Certificate{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey},
		pool:       x509.NewCertPool(),
	}
	c.pool.AddCert(caCert)
	return c
}

var serial atomic.Int64

func newCert(t testing.TB, parentKey *ecdsa.PrivateKey, parent, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("webhooktest: key: %v", err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("webhooktest: certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("webhooktest: certificate: %v", err)
	}
	return key, cert
}

func marshalKey(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("webhooktest: key: %v", err)
	}
	return der
}

func writePEM(t testing.TB, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("webhooktest: write %s: %v", name, err)
	}
	return path
}

// CloseConnection is a Responder that closes the connection without an
// answer, as an endpoint that crashes on a request does (HTTP/1.1 only).
func CloseConnection(w http.ResponseWriter, _ *http.Request) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
	}
}

// Hang is a Responder that never answers: it returns only when the client
// gives up or the receiver stops.
func Hang(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
