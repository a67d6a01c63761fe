"""A hooks module with a typo: post_frok is not a hook (the master refuses to start)."""


def post_frok(server, worker):
    pass
