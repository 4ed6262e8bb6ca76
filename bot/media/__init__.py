"""What people send besides text, made into something the turn can use (issue 25).

`reader` decides per message: a voice note becomes its transcript (`speech`, through litellm's
transcription call; WeChat's own transcript is used as it is), a photo becomes an image part for
a reply model that accepts images (`vision`), a text, Markdown or PDF file becomes its text
(`documents`). Bytes come through the channel's `FetchesMedia` seam with size caps and a timeout;
the gateway never sees a platform URL. What cannot be read is a `MediaProblem`: one line for the
person, and whether the message waits in the inbox to be tried again.

May import the port, the shared modules (config) and memory/ (litellm through memory.llm, private
files); the turn imports it.
"""
