module tenant-gateway.io/bench/references

go 1.24
