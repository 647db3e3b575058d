"""Crash torture: concurrent exactly-once load, kill -9 at random points, an anomaly checker."""
