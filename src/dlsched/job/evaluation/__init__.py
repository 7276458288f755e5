"""Pricing one layout of a job: the evaluator, the pipeline replica's time and the pipeline split.
"""
