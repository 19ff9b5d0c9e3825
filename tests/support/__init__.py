"""Helpers the tests share: real engine processes, HTTP calls, bounded waits."""
