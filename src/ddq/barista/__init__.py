"""Barista, the worker of distributed training: its loop, its local server and the dummy client."""
