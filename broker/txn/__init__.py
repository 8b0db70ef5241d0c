"""Kafka transactions' coordinator side (KIP-98): the state machine of the transactional ids of one
``__transaction_state`` partition (``state.py``) and that partition's record format
(``log_format.py``). The shell that hosts them is ``broker/kafka/txn_apis.py``; the partitions'
side (markers, last stable offset, read_committed) is ``broker/txn_state.py``.
"""
