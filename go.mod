module github.com/sluice-go/sluice

go 1.25.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/dave/jennifer v1.7.1
	github.com/fsnotify/fsnotify v1.10.1
	github.com/redis/rueidis v1.0.79
	github.com/rogpeppe/go-internal v1.16.0
	github.com/yuin/gopher-lua v1.1.2
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/metric v1.46.0
	go.opentelemetry.io/otel/sdk/metric v1.46.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/sdk v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/tools v0.26.0 // indirect
)
