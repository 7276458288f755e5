"""Reproductions of the papers' tables: each returns rows plus the published numbers."""
