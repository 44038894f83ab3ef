import streamlit as st

st.title("trace_lab")
st.info("coming")
