"""The ground layer: argument validation, devices and seeds, optional extras, the sphere's geometry and initial tokens, and the Brownian path."""
