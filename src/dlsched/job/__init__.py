"""The job-level planner: one plan for a whole hybrid-parallel training job.

Three inputs (Calculon's split): what is trained (``model_spec.Model``), how it is
parallelised and run (``execution.Execution``: a field None is searched) and what it runs on
(``cluster.System``). The evaluator prices a layout by composing the domains: per-layer GPU
compute (``models.compute``), every collective on the links its group spans (``collectives``),
gradient buckets by the data-parallel policies (``dataparallel``) and the pipeline schedule,
timed in closed form and checked against the pipeline simulator (``pipeline.simulate``).
"""
