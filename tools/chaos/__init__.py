"""`ferry chaos run`: a seeded fault campaign against a local cluster, checked afterwards.

``schedule.py`` (pure) turns a seed into the faults and reassignments of a run; ``fault_proxy.py``
sits in front of the S3 endpoint and fails or delays requests on command; ``runner.py`` starts the
cluster and the workloads and applies the schedule; ``checker.py`` (pure) decides the verdict;
``timeline.py`` draws it.
"""
