"""Open WebUI 0.12's built-in tool definitions as its page sends them with every chat (36
tools, ~25k cl100k_base tokens), for tests/clients/test_open_webui.py and bench/tools_fit.py.

Named as Open WebUI's `backend/open_webui/tools/builtin.py` names them, with descriptions of
its docstrings' kind, sized so that together they take about what its page sends."""

from __future__ import annotations

BUILTIN = [
    "get_current_timestamp", "calculate_timestamp", "notify", "search_web", "fetch_url",
    "generate_image", "edit_image", "search_memories", "add_memory", "update_memories",
    "list_memory_paths", "read_memory_path", "search_notes", "view_note", "write_note",
    "replace_note_content", "search_chats", "view_chat", "search_channels",
    "search_channel_messages", "view_channel_message", "view_channel_thread",
    "list_knowledge_bases", "search_knowledge_bases", "query_knowledge_bases",
    "search_knowledge_files", "query_knowledge_files", "view_knowledge_file", "view_file",
    "grep_knowledge", "kb_exec", "execute_code", "list_skills", "view_skill",
    "stop_task", "list_tasks",
]  # fmt: skip
DOCSTRING = (
    "Use this tool when the user's request needs it; it returns JSON with the results or an "
    "error. Results are limited to what the user may read: their own items, items shared "
    "with their groups, and items attached to the model. Prefer a precise query; an empty "
    "result means nothing matched, not that the tool failed. "
)


def open_webui_tools() -> list[dict]:
    """36 function tools in the shape Open WebUI sends (`convert_function_to_spec`)."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ').capitalize()}. " + DOCSTRING * 9,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look up. " * 8},
                        "count": {"type": "integer", "description": "How many results."},
                    },
                    "required": ["query"],
                },
            },
        }
        for name in BUILTIN
    ]
