"""`make bench`: streamfold's throughput, latency and memory beside a naive baseline and the limit."""
