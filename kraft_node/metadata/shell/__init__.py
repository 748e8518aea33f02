"""The metadata shell (``kraft-metadata-shell``): the image as a tree, Kafka's commands, time travel."""
