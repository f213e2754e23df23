package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
)

var httpServerClosed = http.ErrServerClosed

// healthState is what the probes report.
type healthState struct {
	running atomic.Bool
}

func (h *healthState) setRunning(v bool) { h.running.Store(v) }

func newHTTPServer(h *healthState) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.running.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stopped"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
