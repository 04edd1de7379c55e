package rls

import (
	"io"
	"net/http"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request's body.
const maxJSONBody = 1 << 20

// JSONHandler serves envoyproxy/ratelimit's /json endpoint, for clients
// that cannot speak gRPC: a RateLimitRequest in protobuf's JSON form in
// the body, the RateLimitResponse in the answer, with status 200, or 429
// when the request is over a limit. A request that cannot be read or that
// ShouldRateLimit refuses as invalid gets 400, one it cannot decide 503
// (no configuration yet, Redis unavailable while failing closed) or 500,
// each with the reason as plain text.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
		if err != nil || len(body) > maxJSONBody {
			http.Error(w, "cannot read the request body (at most 1 MiB)", http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code := http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable:
				code = http.StatusServiceUnavailable
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "cannot write the response", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write(out)
	})
}

// HealthNames are the services the gRPC health service reports: the
// server as a whole (""), envoyproxy/ratelimit's name, and the rate limit
// service's own.
var HealthNames = []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"}

// Health is the service's health, on gRPC (grpc.health.v1) and on HTTP
// (/healthcheck): serving once a configuration is in force, until
// shutdown begins.
type Health struct {
	svc      *Service
	grpc     *health.Server
	stopping atomic.Bool
}

// NewHealth returns the health of svc.
func NewHealth(svc *Service) *Health {
	h := &Health{svc: svc, grpc: health.NewServer()}
	h.Update()
	return h
}

// Register adds the gRPC health service to srv.
func (h *Health) Register(srv *grpc.Server) { healthpb.RegisterHealthServer(srv, h.grpc) }

// OK reports whether the service is serving.
func (h *Health) OK() bool { return !h.stopping.Load() && h.svc.Config() != nil }

// Update sets the gRPC health to OK; call it after the service's
// configuration changed.
func (h *Health) Update() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.OK() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, n := range HealthNames {
		h.grpc.SetServingStatus(n, st)
	}
}

// Shutdown reports NOT_SERVING from now on, so that load balancers and
// Envoy's health checks move away while the server drains.
func (h *Health) Shutdown() {
	h.stopping.Store(true)
	h.grpc.Shutdown()
}

// ServeHTTP answers /healthcheck: 200 "OK" when serving, else 500, as
// envoyproxy/ratelimit does.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if !h.OK() {
		http.Error(w, "not serving", http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}
