// Anchor translation unit for the shared precompiled header (see src/CMakeLists.txt).
