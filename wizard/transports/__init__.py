"""How the wizard reaches hosts (SSH), the cluster (Kubernetes API) and Helm.

Every transport has a dry-run twin that records what it would have done; ``export``
uses only those, which is how dry-run is guaranteed to connect to nothing.
"""
