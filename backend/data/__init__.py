"""Datasets: images, videos, buckets, batches, the stage-1 cache and captions. Imports the
layers below (core, families, config, models).
"""
