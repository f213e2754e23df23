// Package natstest runs a real NATS server with JetStream inside the test
// process, on a free port with its own storage directory, so each test has a
// broker of its own that it can stop and start again.
package natstest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an in-process NATS server with JetStream.
type Server struct {
	t    testing.TB
	dir  string
	port int
	opts func(*server.Options)
	srv  *server.Server
}

// Start runs a server until the test ends. configure, when given, may change
// the server options (limits, accounts) before it starts.
func Start(t testing.TB, configure ...func(*server.Options)) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), port: freePort(t)}
	s.opts = func(o *server.Options) {
		for _, c := range configure {
			c(o)
		}
	}
	// The port was free when freePort closed its listener; another test's
	// server may take it before this one listens: then try another.
	for attempt := 1; ; attempt++ {
		err := s.tryStart()
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatal(err)
		}
		s.port = freePort(t)
	}
	t.Cleanup(s.Stop)
	return s
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart starts the server on s.port.
func (s *Server) tryStart() error {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      s.port,
		JetStream: true,
		StoreDir:  s.dir,
		NoLog:     true,
		NoSigs:    true,
	}
	s.opts(opts)
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natstest: new server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("natstest: server not ready on port %d", s.port)
	}
	s.srv = srv
	return nil
}

// URL is the server's nats:// URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Stop shuts the server down; its streams stay on disk for Restart.
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Restart starts the server again on the same port with the same storage.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// clients lists the open client connections named name.
func (s *Server) clients(name string) []*server.ConnInfo {
	s.t.Helper()
	if s.srv == nil {
		return nil
	}
	connz, err := s.srv.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		s.t.Fatalf("natstest: list connections: %v", err)
	}
	var out []*server.ConnInfo
	for _, c := range connz.Conns {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// Clients counts the open client connections named name: a driver that
// reopens its connection must not leave the old one open.
func (s *Server) Clients(name string) int { return len(s.clients(name)) }

// Kick makes the running server close every client connection named name,
// as a server does to a client it will not serve; the server stays up and
// the clients may connect again.
func (s *Server) Kick(name string) {
	s.t.Helper()
	for _, c := range s.clients(name) {
		// A connection that closed meanwhile is already what Kick wants.
		_ = s.srv.DisconnectClientByID(c.Cid)
	}
}

// Connect opens a client connection closed at the end of the test.
func (s *Server) Connect(t testing.TB) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(s.URL())
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Stream creates a file-backed stream that survives Restart.
func (s *Server) Stream(t testing.TB, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	_, js := s.Connect(t)
	if cfg.Storage == 0 {
		cfg.Storage = jetstream.FileStorage
	}
	st, err := js.CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatalf("natstest: create stream %s: %v", cfg.Name, err)
	}
	return st
}

// Messages reads every message in the stream, in stream order.
func Messages(t testing.TB, st jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("natstest: stream info: %v", err)
	}
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("natstest: get message %d: %v", seq, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// Count returns the number of messages in the stream.
func Count(t testing.TB, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatalf("natstest: stream info: %v", err)
	}
	return info.State.Msgs
}
