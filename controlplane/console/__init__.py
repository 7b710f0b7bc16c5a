"""The organization's own console pages: members, invitations, secrets and the audit log."""
