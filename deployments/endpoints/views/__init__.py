"""The endpoint's console pages: list and detail, history, wizard, onboarding, playground,
optimizer."""
