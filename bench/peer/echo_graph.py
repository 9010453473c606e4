"""A trivial echo graph, so the LangGraph dev server has something to serve threads for."""

from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    message: str


def echo(state: State) -> State:
    return {"message": state["message"]}


graph = StateGraph(State).add_node("echo", echo).add_edge(START, "echo").add_edge("echo", END).compile()
