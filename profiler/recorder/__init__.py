"""The recorder: launches the target, listens for its agent, samples its process tree from
outside, and streams every frame to the profile file while the run goes on."""
