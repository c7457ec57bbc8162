"""The scheduler's simulator (`duck simulate`): progress curves replayed under a policy and a
model of the server, in virtual time. The policies and the slot book it drives are scheduler/'s."""
