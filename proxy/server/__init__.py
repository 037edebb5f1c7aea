"""The process: serving the app (listeners, TLS, signals, the graceful
stop), the front middleware and response hook every request goes through,
the metrics listener, and the heap's tuning."""
