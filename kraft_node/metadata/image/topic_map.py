"""The topics image's persistent maps (``TopicMap``) and its delta's bulk apply, from the
``_topics_map`` kernel pair (``kraft_node/_native/_topics_map.pyx``, a C hash trie, and its
pure twin over ``immutables.Map``; :func:`kraft_storage.accel.load` picks one per process).

Why a module of its own: the kernel's classes have no Python-level types, so their typed
interface is stated once in ``topic_map.pyi`` beside this file (what mypy and the image's users
read), and this module only binds the names to the chosen twin.  The contract and the reasons
for a native map are in the twin's module doc (``kraft_node/_pure/_topics_map.py``).
"""
from __future__ import annotations

from kraft_storage.accel import load

__all__ = ["TopicMap", "TopicMapMutation", "TopicPlan", "apply_topics_delta"]

_k = load("_topics_map", "kraft_node")

TopicMap = _k.TopicMap
TopicMapMutation = _k.TopicMapMutation
TopicPlan = _k.TopicPlan
apply_topics_delta = _k.apply_topics_delta
