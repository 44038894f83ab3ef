import streamlit as st

st.title("compile_vs_eager")
st.info("coming")
