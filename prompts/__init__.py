"""The model's prompts as Jinja templates (*.j2), shipped as package data in the wheel.

No prompt text lives in Python: duck.agent.turn renders these with StrictUndefined.
"""
