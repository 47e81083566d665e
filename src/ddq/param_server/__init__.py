"""The parameter server's parts: shards, the workers' client, launcher, metrics, snapshots, staleness rule."""
