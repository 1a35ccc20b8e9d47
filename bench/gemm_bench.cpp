// Placeholder: being written (issue 10).
int main() { return 77; }
