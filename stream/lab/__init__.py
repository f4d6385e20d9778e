"""The lab: offline replay, evaluation and synthetic data.

Never imports ``stream.service``.
"""
