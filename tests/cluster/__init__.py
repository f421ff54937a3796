"""The job on a local stack with a Spark standalone cluster of two workers (`make test-cluster`)."""
