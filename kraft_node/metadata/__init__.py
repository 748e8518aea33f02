"""The cluster metadata: the image, its loader and the QuorumController (empty until their issues).

See README.md for the import rule: this package may import only the Raft API
(``kraft_node.raft``), ``kraft_storage``'s public modules and the timeline --
never ``kraft_node.raft.io``, ``kraft_node.network`` or ``kraft_node.server``.
"""
