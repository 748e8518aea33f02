"""The broker's per-partition log services for the Produce path (issue 25): Kafka's LogValidator
(``validator``) and its ProducerStateManager (``producer_state``).  See README.md."""
