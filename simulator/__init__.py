"""The embedded lab: a simulated site (GPU nodes, AIStor peers, cluster, helm) on loopback."""
