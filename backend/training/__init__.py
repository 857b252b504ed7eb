"""The training loop, checkpoints, optimizers, timesteps, launch facts and samples. Imports
the layers below.
"""
