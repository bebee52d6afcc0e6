"""The embedded stack: nats-server and the five services on one machine."""
