"""What runs in a Spark task: downpour's Barista (barista.py; barista_server.py, its HTTP server for the dummy
client) and actor-learner's actor (actor.py), which only plays and sends its experience to the central learner."""
