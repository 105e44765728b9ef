"""Helpers of torchtpu.train: configuration, checkpoints, metrics, loss plot."""
