"""Communication costs of a job layout: collectives on their groups' links, the DP step, pipeline
transfers, TP overlap and context parallelism."""
