"""The broker: its lifecycle, its channel to the controller, the metadata cache, the client APIs and
the forwarding of admin writes (see README.md); assembled by ``kraft_node.server.broker``."""
