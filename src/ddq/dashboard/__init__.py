"""The babysitting dashboard: a read-only Flask page and JSON API over a run's numbers in Redis."""
