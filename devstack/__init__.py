"""Developer tooling, not part of the gateway: a throwaway local Kubernetes
control plane for `tenant-gateway dev`, the test suite and the benchmarks."""
